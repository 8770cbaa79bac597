package strictjson

import (
	"errors"
	"strings"
	"testing"
)

type point struct {
	X int `json:"x"`
}

func TestDecode(t *testing.T) {
	var p point
	if err := Decode(strings.NewReader(" {\"x\": 3}\n"), &p); err != nil || p.X != 3 {
		t.Fatalf("Decode = %+v, %v; want {X:3}, nil", p, err)
	}
}

func TestDecodeRefusesUnknownFields(t *testing.T) {
	var p point
	if err := Decode(strings.NewReader(`{"x": 3, "y": 4}`), &p); err == nil {
		t.Fatal("Decode of an unknown field = nil, want an error")
	}
}

func TestDecodeRefusesTrailingData(t *testing.T) {
	for _, tail := range []string{" {}", " 1", "]", " x"} {
		var p point
		if err := Decode(strings.NewReader(`{"x": 3}`+tail), &p); !errors.Is(err, ErrTrailingData) {
			t.Errorf("Decode with %q after the value = %v, want ErrTrailingData", tail, err)
		}
	}
}

func TestDecodeRefusesNothing(t *testing.T) {
	var p point
	if err := Decode(strings.NewReader(""), &p); err == nil {
		t.Fatal("Decode of nothing = nil, want an error")
	}
}
