/* expect: invalid D pragma: foo @ 2:1 */
#pragma D foo
BEGIN { exit(0); }
