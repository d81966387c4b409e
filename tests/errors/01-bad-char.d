/* expect: syntax error near "#" @ 4:11 */
BEGIN
{
    x = 1 # 2;
}
