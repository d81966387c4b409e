/* expect: expression contains division by zero @ 2:17 */
BEGIN { x = 10; x /= 0; }
