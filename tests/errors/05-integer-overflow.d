/* expect: constant 0x1ffffffffffffffff results in integer overflow @ 2:13 */
BEGIN { x = 0x1ffffffffffffffff; }
