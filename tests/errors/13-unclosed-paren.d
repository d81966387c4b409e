/* expect: syntax error near ";" @ 2:19 */
BEGIN { x = (1 + 2; }
