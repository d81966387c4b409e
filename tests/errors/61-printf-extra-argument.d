/* expect: printf( ) prototype mismatch: only 0 arguments required by this format string @ 2:16 */
BEGIN { printf("hi\n", 1); }
