/* expect: operands have incompatible types: "int" = "string" @ 5:5 */
BEGIN
{
    x = 1;
    x = "s";
}
