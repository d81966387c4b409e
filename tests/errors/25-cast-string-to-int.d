/* expect: invalid cast expression: "string" to "int" @ 2:13 */
BEGIN { x = (int)"a"; }
