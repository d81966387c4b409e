/* expect: newline encountered in string literal @ 4:9 */
BEGIN
{
    x = "abc;
}
