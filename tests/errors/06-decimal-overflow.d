/* expect: constant 99999999999999999999999 results in integer overflow @ 2:13 */
BEGIN { x = 99999999999999999999999; }
