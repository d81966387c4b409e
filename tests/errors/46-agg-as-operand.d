/* expect: operands have incompatible types: "aggregation" + "int" @ 2:27 */
BEGIN { @a = count(); x = @a + 1; }
