/* expect: lquantize( ) base (argument #1) must be less than limit (argument #2) @ 2:9 */
BEGIN { @a = lquantize(1, 10, 5, 1); }
