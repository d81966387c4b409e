/* expect: probe description dtrace:::BEGINX does not match any probes @ 6:1 */
BEGIN
{
}

dtrace:::BEGINX
{
}
