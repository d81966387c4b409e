/* expect: syntax error near end of input @ 5:1 */
BEGIN
{
    x = 1;
