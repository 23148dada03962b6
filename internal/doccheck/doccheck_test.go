package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// undocumented lists the exported declarations of one Go source file that have no doc comment:
// functions, methods of exported types, types, and constants and variables (a trailing line
// comment or the group's comment counts for those).
func undocumented(t *testing.T, fset *token.FileSet, path string) []string {
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	require.NoError(t, err, path)
	var out []string
	miss := func(pos token.Pos, name string) { out = append(out, fset.Position(pos).String()+" "+name) }
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && d.Doc == nil && exportedReceiver(d) {
				miss(d.Pos(), d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && d.Doc == nil && s.Doc == nil {
						miss(s.Pos(), s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
							miss(n.Pos(), n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// exportedReceiver is whether d is a function, or a method of an exported type (methods of
// unexported types are not part of any package's documentation).
func exportedReceiver(d *ast.FuncDecl) bool {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return true
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, ok := t.(*ast.Ident)
	return !ok || id.IsExported()
}

func TestUndocumentedFindsWhatItShould(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// Doc is documented.
type Doc int

type Bare int

// String is documented.
func (Doc) String() string { return "" }

func (Bare) Error() string { return "" }

type hidden int

func (hidden) Exported() {}

const (
	// A is documented.
	A = 1
	B = 2 // B has a line comment
	C = 3
)

func F() {}
`
	path := filepath.Join(dir, "p.go")
	require.NoError(t, writeFile(path, src))
	got := undocumented(t, token.NewFileSet(), path)
	names := make([]string, len(got))
	for i, g := range got {
		names[i] = g[strings.LastIndex(g, " ")+1:]
	}
	assert.Equal(t, []string{"Bare", "Error", "C", "F"}, names)
}

// Every exported name of the module's Go sources (tests aside) has a doc comment.
func TestEveryExportedNameIsDocumented(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	fset := token.NewFileSet()
	var missing []string
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if p != root && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			missing = append(missing, undocumented(t, fset, p)...)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, missing, "exported names without a doc comment")
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }
