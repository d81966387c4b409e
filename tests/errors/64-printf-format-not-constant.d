/* expect: printf( ) argument #1 is incompatible with prototype:\n\tprototype: string constant\n\t argument: string @ 2:16 */
BEGIN { printf(execname); }
