/* expect: @a[ ] prototype mismatch: 2 keys passed, 1 expected @ 2:26 */
BEGIN { @a[1] = count(); @a[1, 2] = count(); }
