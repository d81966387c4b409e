/* expect: probe description nosuch:::probe does not match any probes @ 2:1 */
nosuch:::probe
{
}
