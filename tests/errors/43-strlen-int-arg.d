/* expect: strlen( ) argument #1 is incompatible with prototype:\n\tprototype: char *\n\t argument: int @ 2:22 */
BEGIN { trace(strlen(1)); }
