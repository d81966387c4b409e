/* expect: operator && requires operands of scalar type @ 2:13 */
BEGIN { x = execname && 1; }
