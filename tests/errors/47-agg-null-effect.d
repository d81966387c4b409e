/* expect: expression has null effect: @a @ 5:5 */
BEGIN
{
    @a = count();
    @a;
}
