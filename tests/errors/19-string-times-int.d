/* expect: operator * requires operands of arithmetic type @ 2:13 */
BEGIN { x = "a" * 2; }
