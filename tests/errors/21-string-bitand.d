/* expect: operator & requires operands of integral type @ 2:13 */
BEGIN { x = execname & 1; }
