/* expect: expression contains division by zero @ 2:13 */
BEGIN { x = 10 / 0; }
