/* expect: predicate result must be of scalar type @ 3:2 */
BEGIN
/execname/
{
}
