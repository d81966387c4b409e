/* expect: lquantize( ) argument #3 must be a non-zero positive integer constant @ 2:9 */
BEGIN { @a = lquantize(1, 0, 10, 0); }
