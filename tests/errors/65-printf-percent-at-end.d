/* expect: format conversion #1 name expected before end of format string @ 2:16 */
BEGIN { printf("abc%"); }
