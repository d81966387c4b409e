/* expect: printa( ) argument #1 is incompatible with prototype:\n\tprototype: aggregation\n\t argument: int @ 2:23 */
BEGIN { x = 1; printa(x); }
