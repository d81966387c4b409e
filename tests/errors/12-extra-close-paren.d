/* expect: extra ) in input stream @ 2:20 */
BEGIN { x = (1 + 2)); }
