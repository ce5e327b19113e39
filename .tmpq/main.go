package main

import (
	"database/sql"
	"fmt"
	"os"

	_ "modernc.org/sqlite"
)

func main() {
	db, err := sql.Open("sqlite", "file:"+os.Args[1]+"?_pragma=query_only(1)")
	if err != nil {
		panic(err)
	}
	rows, err := db.Query(os.Args[2])
	if err != nil {
		panic(err)
	}
	cols, _ := rows.Columns()
	for rows.Next() {
		v := make([]any, len(cols))
		p := make([]any, len(cols))
		for i := range v {
			p[i] = &v[i]
		}
		rows.Scan(p...)
		for i, c := range cols {
			fmt.Printf("%s=%v ", c, v[i])
		}
		fmt.Println()
	}
}
