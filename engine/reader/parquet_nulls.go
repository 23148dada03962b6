package reader

import "github.com/parquet-go/parquet-go"

// elementLevel is the definition level at which a value of the leaf at path is an element of its
// innermost list (0 for a leaf outside any list). A null value below it is a null or empty list, a
// missing bag; a null value at or above it is a null element inside a list, which is no ID: reading
// past it would shift the positions of the elements after it, so the reader refuses it.
func elementLevel(schema parquet.Node, path []string) int {
	def, elem := 0, 0
	n := schema
	for _, name := range path {
		var next parquet.Node
		for _, f := range n.Fields() {
			if f.Name() == name {
				next = f
				break
			}
		}
		if next == nil {
			return elem
		}
		n = next
		switch {
		case n.Optional():
			def++
		case n.Repeated():
			def++
			elem = def
		}
	}
	return elem
}
