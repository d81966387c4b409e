/* expect: predicate result must be of scalar type @ 5:1 */
BEGIN
/execname/
{
}
