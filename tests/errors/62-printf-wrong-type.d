/* expect: printf( ) argument #2 is incompatible with conversion #1 prototype:\n\tconversion: %d\n\t prototype: char, short, int, long, or long long\n\t  argument: string @ 2:16 */
BEGIN { printf("%d\n", "s"); }
