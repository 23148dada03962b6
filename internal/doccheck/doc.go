// Package doccheck holds the test that every exported Go name of the module has a doc comment
// (what golint's and revive's "exported" rules check; neither is a dependency here, and the rule
// needs only go/ast).
package doccheck
