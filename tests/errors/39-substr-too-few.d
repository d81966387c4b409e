/* expect: substr( ) prototype mismatch: 1 arg passed, at least 2 expected @ 2:15 */
BEGIN { trace(substr("a")); }
