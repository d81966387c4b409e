/* expect: syntax error near "y = 2;" @ 5:5 */
BEGIN
{
    x = 1
    y = 2;
}
