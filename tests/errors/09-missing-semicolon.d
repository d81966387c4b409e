/* expect: syntax error near "y" @ 5:5 */
BEGIN
{
    x = 1
    y = 2;
}
