/* expect: floating-point constants are not permitted @ 2:13 */
BEGIN { x = 1.5; }
