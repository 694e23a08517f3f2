"""annotated_transformer: the companion package of the annotated-transformer course."""
