/* expect: operands have incompatible types: "string" == "int" @ 2:13 */
BEGIN { x = "a" == 1; }
