/* expect: newline encountered in string literal @ 5:1 */
BEGIN
{
    x = "abc;
}
