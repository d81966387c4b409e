/* expect: constant 089 contains invalid digit 8 @ 2:13 */
BEGIN { x = 089; }
