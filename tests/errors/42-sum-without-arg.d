/* expect: sum( ) prototype mismatch: 0 args passed, 1 expected @ 2:14 */
BEGIN { @a = sum(); }
