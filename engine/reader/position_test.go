package reader

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A position decodes only as a source gives it: a missing or null field read as 0 and resumed from
// the data's start, and counts no source gives (negative, a skipped count past the rows read) were
// taken as they came.
func TestPositionDecoding(t *testing.T) {
	good := Position{File: 1, Row: 5, Offset: 80, Global: 12, Skipped: 2}
	data, err := json.Marshal(good)
	require.NoError(t, err)
	var p Position
	require.NoError(t, json.Unmarshal(data, &p))
	require.Equal(t, good, p)
	shuffled := Position{Row: 3, Offset: -1, Global: 3, Shuffle: 8, Seed: 4, Window: 2, Taken: 8}
	data, err = json.Marshal(shuffled)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &p))
	require.Equal(t, shuffled, p)
	for _, tc := range []struct{ name, doc, want string }{
		{"null file", `{"file":null,"row":5,"offset":80,"global":12,"skipped":2}`, `"file" is missing or null`},
		{"missing row", `{"file":1,"offset":80,"global":12,"skipped":2}`, `"row" is missing or null`},
		{"unknown field", `{"file":1,"row":5,"offset":80,"global":12,"skipped":2,"rows":3}`, `unknown field "rows"`},
		{"negative skipped", `{"file":1,"row":5,"offset":80,"global":12,"skipped":-1}`, "negative"},
		{"offset below -1", `{"file":1,"row":5,"offset":-2,"global":12,"skipped":2}`, "byte offset -2"},
		{"row past global", `{"file":1,"row":50,"offset":80,"global":12,"skipped":2}`, "50 rows read in the file but 12"},
		{"skipped past global", `{"file":1,"row":5,"offset":80,"global":12,"skipped":13}`, "13 rows skipped of 12"},
		{"taken past window", `{"file":0,"row":0,"offset":-1,"global":0,"skipped":0,"shuffle":4,"taken":5}`, "5 rows taken"},
		{"not an object", `[1,2]`, "position:"},
		{"fraction", `{"file":1.5,"row":5,"offset":80,"global":12,"skipped":2}`, "position:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, json.Unmarshal([]byte(tc.doc), &p), tc.want)
		})
	}
}

// FuzzPositionDecoding: any document decodes to a position that passes Check, or is refused; a
// decoded one encodes and decodes to itself.
func FuzzPositionDecoding(f *testing.F) {
	f.Add(`{"file":1,"row":5,"offset":80,"global":12,"skipped":2}`)
	f.Add(`{"file":0,"row":0,"offset":-1,"global":0,"skipped":0,"shuffle":4,"seed":3,"window":1,"taken":2}`)
	f.Add(`{"file":null}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var p Position
		if json.Unmarshal([]byte(doc), &p) != nil {
			return
		}
		require.NoError(t, p.Check())
		data, err := json.Marshal(p)
		require.NoError(t, err)
		var q Position
		require.NoError(t, json.Unmarshal(data, &q))
		require.Equal(t, p, q)
	})
}
