// Command tlogcheck checks purgekeeper's transparency log against Go's implementation,
// golang.org/x/mod/sumdb/tlog and golang.org/x/mod/sumdb/note, which purgekeeper did not
// write. It reads one JSON request on stdin and writes one JSON response on stdout:
//
//   - leaves: Go builds its own stored hashes (StoredHashes) from the leaf bytes and
//     returns them in storage order, with the roots (TreeHash), inclusion proofs
//     (ProveRecord), consistency proofs (ProveTree) and tiles (NewTiles, ReadTileData,
//     height 8) asked for.
//   - checks: Go opens the signed notes with the given verification key (note.Open) and
//     checks the inclusion proofs (CheckRecord) and consistency proofs (CheckTree) against
//     the checkpoints in them; each check answers ok or Go's error. A "signed_note" check
//     opens any note (a completion statement) with the key and answers its text.
//   - sign: Go makes a key (note.GenerateKey) and signs the text with it; sign_with signs
//     the text with a given signing key (note.NewSigner).
//
// Built by tests/integration/test_tlog_interop.py in GOPATH mode against Debian's
// golang-golang-x-mod-dev.
package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type sizePair struct {
	Old   int64 `json:"old"`
	New   int64 `json:"new"`
	Size  int64 `json:"size"`
	Index int64 `json:"index"`
}

type check struct {
	Kind    string      `json:"kind"` // "note", "signed_note", "record" or "tree"
	Vkey    string      `json:"vkey"`
	Note    string      `json:"note"`
	OldNote string      `json:"old_note"`
	Index   int64       `json:"index"`
	Leaf    []byte      `json:"leaf"`
	Proof   []tlog.Hash `json:"proof"`
}

type signRequest struct {
	Name string `json:"name"`
	Skey string `json:"skey"`
	Text string `json:"text"`
}

type request struct {
	Leaves       [][]byte     `json:"leaves"`
	Roots        []int64      `json:"roots"`
	RecordProofs []sizePair   `json:"record_proofs"`
	TreeProofs   []sizePair   `json:"tree_proofs"`
	Tiles        []sizePair   `json:"tiles"`
	Checks       []check      `json:"checks"`
	Sign         *signRequest `json:"sign"`
	SignWith     *signRequest `json:"sign_with"`
}

type tileOut struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
}

type checkOut struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Text  string `json:"text,omitempty"`
}

type signOut struct {
	Vkey string `json:"vkey,omitempty"`
	Skey string `json:"skey,omitempty"`
	Note string `json:"note"`
}

type response struct {
	Stored       []tlog.Hash   `json:"stored"`
	Roots        []tlog.Hash   `json:"roots"`
	RecordProofs [][]tlog.Hash `json:"record_proofs"`
	TreeProofs   [][]tlog.Hash `json:"tree_proofs"`
	Tiles        [][]tileOut   `json:"tiles"`
	Checks       []checkOut    `json:"checks"`
	Signed       *signOut      `json:"signed,omitempty"`
	SignedWith   *signOut      `json:"signed_with,omitempty"`
}

type storage []tlog.Hash

func (s storage) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(s)) {
			return nil, fmt.Errorf("no stored hash %d", x)
		}
		out[i] = s[x]
	}
	return out, nil
}

func build(leaves [][]byte) (storage, error) {
	var s storage
	for n, leaf := range leaves {
		hashes, err := tlog.StoredHashes(int64(n), leaf, s)
		if err != nil {
			return nil, err
		}
		s = append(s, hashes...)
	}
	return s, nil
}

func generate(req request) (response, error) {
	var resp response
	s, err := build(req.Leaves)
	if err != nil {
		return resp, err
	}
	resp.Stored = s
	for _, n := range req.Roots {
		h, err := tlog.TreeHash(n, s)
		if err != nil {
			return resp, err
		}
		resp.Roots = append(resp.Roots, h)
	}
	for _, p := range req.RecordProofs {
		proof, err := tlog.ProveRecord(p.Size, p.Index, s)
		if err != nil {
			return resp, err
		}
		resp.RecordProofs = append(resp.RecordProofs, proof)
	}
	for _, p := range req.TreeProofs {
		proof, err := tlog.ProveTree(p.New, p.Old, s)
		if err != nil {
			return resp, err
		}
		resp.TreeProofs = append(resp.TreeProofs, proof)
	}
	for _, p := range req.Tiles {
		var tiles []tileOut
		for _, t := range tlog.NewTiles(8, p.Old, p.New) {
			data, err := tlog.ReadTileData(t, s)
			if err != nil {
				return resp, err
			}
			tiles = append(tiles, tileOut{Path: t.Path(), Data: data})
		}
		resp.Tiles = append(resp.Tiles, tiles)
	}
	return resp, nil
}

// openCheckpoint opens a C2SP checkpoint note: the origin line, the size, the root.
// Go's tlog.ParseTree reads only the go.sum database's own origin, so the lines are
// split here; the hash is still parsed by tlog.ParseHash.
func openCheckpoint(msg string, vkey string) (tlog.Tree, error) {
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return tlog.Tree{}, err
	}
	n, err := note.Open([]byte(msg), note.VerifierList(verifier))
	if err != nil {
		return tlog.Tree{}, err
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		return tlog.Tree{}, errors.New("malformed checkpoint")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || lines[1] != strconv.FormatInt(size, 10) {
		return tlog.Tree{}, errors.New("malformed checkpoint size")
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		return tlog.Tree{}, err
	}
	return tlog.Tree{N: size, Hash: root}, nil
}

// openNote opens any signed note with the key and returns its text.
func openNote(msg string, vkey string) (string, error) {
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return "", err
	}
	n, err := note.Open([]byte(msg), note.VerifierList(verifier))
	if err != nil {
		return "", err
	}
	return n.Text, nil
}

func run(c check) error {
	switch c.Kind {
	case "note":
		_, err := openCheckpoint(c.Note, c.Vkey)
		return err
	case "record":
		tree, err := openCheckpoint(c.Note, c.Vkey)
		if err != nil {
			return err
		}
		return tlog.CheckRecord(c.Proof, tree.N, tree.Hash, c.Index, tlog.RecordHash(c.Leaf))
	case "tree":
		old, err := openCheckpoint(c.OldNote, c.Vkey)
		if err != nil {
			return err
		}
		tree, err := openCheckpoint(c.Note, c.Vkey)
		if err != nil {
			return err
		}
		return tlog.CheckTree(c.Proof, tree.N, tree.Hash, old.N, old.Hash)
	}
	return fmt.Errorf("unknown check %q", c.Kind)
}

func sign(r *signRequest) (*signOut, error) {
	out := &signOut{}
	skey := r.Skey
	if skey == "" {
		var err error
		if out.Skey, out.Vkey, err = note.GenerateKey(rand.Reader, r.Name); err != nil {
			return nil, err
		}
		skey = out.Skey
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, err
	}
	msg, err := note.Sign(&note.Note{Text: r.Text}, signer)
	if err != nil {
		return nil, err
	}
	out.Note = string(msg)
	return out, nil
}

func serve(req request) (response, error) {
	resp, err := generate(req)
	if err != nil {
		return resp, err
	}
	for _, c := range req.Checks {
		if c.Kind == "signed_note" {
			if text, err := openNote(c.Note, c.Vkey); err != nil {
				resp.Checks = append(resp.Checks, checkOut{OK: false, Error: err.Error()})
			} else {
				resp.Checks = append(resp.Checks, checkOut{OK: true, Text: text})
			}
			continue
		}
		if err := run(c); err != nil {
			resp.Checks = append(resp.Checks, checkOut{OK: false, Error: err.Error()})
		} else {
			resp.Checks = append(resp.Checks, checkOut{OK: true})
		}
	}
	if req.Sign != nil {
		if resp.Signed, err = sign(req.Sign); err != nil {
			return resp, err
		}
	}
	if req.SignWith != nil {
		if resp.SignedWith, err = sign(req.SignWith); err != nil {
			return resp, err
		}
	}
	return resp, nil
}

func main() {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "tlogcheck: reading the request:", err)
		os.Exit(2)
	}
	resp, err := serve(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlogcheck:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(resp); err != nil {
		fmt.Fprintln(os.Stderr, "tlogcheck: writing the response:", err)
		os.Exit(1)
	}
}
