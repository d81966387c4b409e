/* expect: count( ) prototype mismatch: 1 arg passed, 0 expected @ 2:14 */
BEGIN { @a = count(1); }
