/* expect: failed to resolve y: Unknown variable name @ 4:11 */
BEGIN
{
    trace(y);
}
