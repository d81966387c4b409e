/* expect: syntax error near "->" @ 2:9 */
BEGIN { ->x = 1; }
