/* expect: end-of-file encountered before matching *\/ @ 5:1 */
BEGIN { exit(0); }
/* never closed
BEGIN { }
