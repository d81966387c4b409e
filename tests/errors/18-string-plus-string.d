/* expect: operands have incompatible types: "string" + "string" @ 2:13 */
BEGIN { x = "a" + "b"; }
