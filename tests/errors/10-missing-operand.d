/* expect: syntax error near ";" @ 4:9 */
BEGIN
{
    x = ;
}
