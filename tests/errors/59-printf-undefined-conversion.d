/* expect: format conversion #1 is undefined: %Q @ 2:16 */
BEGIN { printf("%Q\n", 1); }
