/* expect: lquantize( ) argument #1 must be an integer constant @ 2:34 */
BEGIN { x = 0; @a = lquantize(1, x, 10); }
