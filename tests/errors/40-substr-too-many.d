/* expect: substr( ) prototype mismatch: 4 args passed, at least 2 expected @ 2:15 */
BEGIN { trace(substr("a", 1, 2, 3)); }
