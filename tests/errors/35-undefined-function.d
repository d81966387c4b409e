/* expect: undefined function name: foo @ 2:9 */
BEGIN { foo(1); }
