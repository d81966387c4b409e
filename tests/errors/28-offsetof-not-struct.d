/* expect: offsetof operand must be a struct or union type @ 2:13 */
BEGIN { x = offsetof(int, a); }
