/* expect: operator ! requires an operand of scalar type @ 2:13 */
BEGIN { x = !execname; }
