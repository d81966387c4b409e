/* expect: printf( ) format string is empty @ 2:16 */
BEGIN { printf(""); }
