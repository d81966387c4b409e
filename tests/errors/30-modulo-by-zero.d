/* expect: expression contains division by zero @ 2:21 */
BEGIN { x = 10; y = x % 0; }
