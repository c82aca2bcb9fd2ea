"""Structure rules: small pure functions over a traced program (:mod:`.base`), the rules of the
collective matmul rings (:mod:`.ring`) and of the mixture-of-experts routing (:mod:`.moe`)."""
